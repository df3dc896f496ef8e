"""gradus.data_cards package."""
