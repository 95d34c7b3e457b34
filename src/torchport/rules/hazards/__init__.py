"""Target hazards: code that runs everywhere but is slow, wrong or refused on some targets."""
