"""``libertem_live.detectors.base`` at its ported path: what every detector's connection and acquisition share."""
