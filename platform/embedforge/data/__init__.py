"""The shared data format: schemas, readers and writers, and converters from the papers."""
