"""gradus.rl_stage package."""
