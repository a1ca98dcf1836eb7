"""One job model per training framework, one module each.

A framework module defines a :class:`cluster.launching.spec.Framework` subclass and registers
its one object (``NEMO = register(NeMo())``) in :mod:`cluster.site.framework_registry`,
which imports every module here on its first read: a new framework is a new module
here and nothing else names it.
"""
