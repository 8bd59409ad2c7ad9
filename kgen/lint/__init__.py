"""kgen lint: kubectl-like parsing (parse.py), offline schema validation (kgen/schema.py), a rule
registry (registry.py) with one module per rule family (rules_*.py), and the API (api.py)."""
