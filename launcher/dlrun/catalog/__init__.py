"""Catalogs: images, workloads and systems as validated data (YAML + pydantic)."""
from dlrun.catalog.loader import Catalog, CatalogError, load_catalog

__all__ = ["Catalog", "CatalogError", "load_catalog"]
