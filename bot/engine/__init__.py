"""What drives launches: workers, the poller, babysitting, placement,
pipelines, sweeps and the calls to clusters."""
