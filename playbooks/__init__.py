"""Built-in playbooks (Jinja-templated YAML) and their runbooks: data, no code."""
