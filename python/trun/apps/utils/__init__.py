"""The programs of the ``utils.*`` builtins."""
