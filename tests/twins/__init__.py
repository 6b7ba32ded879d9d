"""Twins of the images gpufleet boots, for the cluster tests: the stand-in vendor repository
(``vendor_repo``), its package builder (``debs``), the twins themselves (``images``), the captured tool
outputs (``captures/``) and where every fact comes from (``SOURCES.md``)."""
