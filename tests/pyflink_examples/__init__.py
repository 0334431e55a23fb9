"""PyFlink 2.3's DataStream examples as raylink tests (see ``cases.py``)."""
