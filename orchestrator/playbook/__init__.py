"""The playbook format and its pipeline: fields and operations declared once, loading, validation, the reference, the JSON Schema, starters."""
