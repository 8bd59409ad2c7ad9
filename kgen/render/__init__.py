"""The render pipeline (`kgen render`), one module per stage."""
