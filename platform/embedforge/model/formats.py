"""The formats a trained model is exported in (`model.export`), importable without torch: training writes every
one of them, and the pipeline's export step checks that each is there."""

EXPORT_FORMATS = ("merged", "sentence_transformers")
