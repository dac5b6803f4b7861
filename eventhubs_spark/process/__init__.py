"""What one Spark process (driver or executor) keeps across tasks and micro-batches."""
