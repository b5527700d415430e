"""Image engines, one module each, registered by name in `dlrun.registry.ENGINES` (see engines.base)."""

#: The engine `dlrun images` commands use unless given `--engine`.
DEFAULT_ENGINE = "docker"
