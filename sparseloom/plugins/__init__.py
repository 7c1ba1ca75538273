"""Built-in plugins: backends, compressors, estimators and placement policies.

Each is registered through the same hooks as a third-party plugin (see
:mod:`sparseloom.core.hookspecs`) and lists itself in
:data:`sparseloom.core.registry.DEFAULT_PLUGINS`.
"""
