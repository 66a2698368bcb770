"""Storage: atomic writes and checksums (fsutil.py), O_DIRECT reads (directio.py)."""
