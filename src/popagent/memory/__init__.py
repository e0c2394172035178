"""Long-term memory: validation, credential screening, ranking, rendering and the service."""
