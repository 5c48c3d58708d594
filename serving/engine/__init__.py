"""What every front calls: tokenize, run the graphs through Triton, post-process."""
