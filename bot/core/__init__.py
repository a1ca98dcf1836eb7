"""What each command and button does, and the answers that only read."""
