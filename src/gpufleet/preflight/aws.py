"""AWS preflight checks (EFA, placement vs capacity, FSx sizes, zones): issue 3."""
