"""Helpers for building a Launcher from other tools' settings (torchrunx's ``integrations``)."""
