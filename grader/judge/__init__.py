"""The judge: numbers to verdicts and findings (pure, no GPU)."""
