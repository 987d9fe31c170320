"""The fleet's machinery (see `freshcache.fleet`): the shared store, the worker, the source.

Imported only when a `FreshCache` is given ``fleet=``; this is where redis is imported.
"""
