"""Parse benchmark output into results, store them with provenance, read them back."""
