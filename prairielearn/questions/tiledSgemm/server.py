"""The question's server code, run by PrairieLearn as each submission is taken (before it is graded).

parse() stamps the time PrairieLearn took the submission into its submitted answers, which PrairieLearn
writes into the grading job's /grade/data/data.json. `grade prairielearn --remote URL` sends that time to
the grading service, which keeps each student's newest submission by it: grading jobs may reach the service
out of order, and an older one must never replace a newer one's grade.
"""
import datetime


def parse(data):
    data["submitted_answers"]["_submitted_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
