"""Environments shipped by attn_envs."""
