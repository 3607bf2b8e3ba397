"""Stand-in of the lmcache.v1 package."""
