"""Rules about samples that several steps share: splits, transforms, manifest/provenance/rejects tables."""
