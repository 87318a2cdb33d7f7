"""fl-lightning."""
