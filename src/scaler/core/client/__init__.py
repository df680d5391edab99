"""The client's pure core."""
