"""Producer side: the runtime adapter, the publisher, its spool and the simulator."""
