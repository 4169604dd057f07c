"""Method plugins: one module per method, each defining `Method` (see benchmarks/method.py)."""
