"""gradus.flows package."""
