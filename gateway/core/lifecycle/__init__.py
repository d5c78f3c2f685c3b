"""What keeps the gateway's long-lived work running, for every room that has some: the
supervisor of its loops, leader election for single-connection work, and the database a
command opens."""
