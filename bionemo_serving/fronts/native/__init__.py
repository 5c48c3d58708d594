"""The service's own API dialect: its request and response types (protocol.py, also its OpenAPI schema), its routes
(routes.py) and the rendering of the engine's results into its responses (render.py)."""
