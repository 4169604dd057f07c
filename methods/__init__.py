"""Method plugins: one module per method, each defining `Method` (see benchmarks/run/method.py)."""
