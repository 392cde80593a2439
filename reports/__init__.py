"""After-action reporting: reads run directories, knows nothing of the engine."""
