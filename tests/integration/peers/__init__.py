"""The peers in other languages: the Java and JavaScript SDKs and the old Scala connector."""
