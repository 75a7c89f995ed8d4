"""`grade serve`: the grading service. An LMS container without a GPU posts a student's archive over HTTP;
the service queues it (SQLite, so a restart loses nothing), grades it here as `grade batch` grades a
student (a worker process per submission, student code sandboxed), and answers the result."""
