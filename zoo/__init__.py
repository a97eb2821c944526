"""Config-driven experiment zoo (see issue: the zoo)."""
