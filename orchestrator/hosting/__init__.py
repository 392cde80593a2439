"""Where agents run and how their messages travel: in process, or on Ray actors over ZeroMQ."""
