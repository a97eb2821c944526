"""Procedurally generated CarRacing backgrounds (see ``make_backgrounds.py`` and LICENSE.md)."""
