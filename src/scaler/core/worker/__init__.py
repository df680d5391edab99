"""The worker agent's pure core and its processor messages."""
