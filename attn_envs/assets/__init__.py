"""Data files shipped with attn_envs (background images for CarRacing)."""
