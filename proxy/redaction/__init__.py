"""What never reaches a cassette: built-in secrets, and the user's [redact] rules."""
