"""MLA decode: the split-KV kernel over a paged latent KV cache, its reference and its entry point."""
