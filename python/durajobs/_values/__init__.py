"""Plain values the layers share: answer rows, states, durations and counts."""
