"""Attention layers and SB3-compatible policies (see issue: extractors)."""
