"""Image engines, one module each, registered by name in `dlrun.registry.ENGINES` (see engines.base)."""
