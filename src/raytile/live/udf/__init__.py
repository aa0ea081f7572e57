"""``libertem_live.udf`` at its ported path: UDFs made for live data (:mod:`.monitor`, :mod:`.record`)."""
