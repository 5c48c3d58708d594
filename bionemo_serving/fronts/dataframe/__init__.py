"""The DataFrame dialect: tables in and out over BentoML's `PandasDataFrame` wire format, what
`bentoml.batch.run_in_spark` calls (routes.py; docs/spark.md)."""
