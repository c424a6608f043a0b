"""What a configuration costs in quality: measured against the file's own weights (perplexity, KL,
top-1 agreement), kept in a ledger per machine, and a Hugging Face copy for checks against
transformers."""
