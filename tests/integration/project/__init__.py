"""The project itself: its documentation as a user follows it, and its ./dev helper."""
