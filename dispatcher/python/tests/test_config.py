"""codefleet.config: the CLI's settings file format and precedence."""
import os
import tempfile
import unittest

import codefleet as cf
from codefleet.config import DEFAULT_BROKERS


class SettingsFile(unittest.TestCase):
    def write(self, text: str) -> str:
        fd, path = tempfile.mkstemp(suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.unlink, path)
        return path

    def test_the_stack_format(self):
        path = self.write(
            "# codefleet client settings (generated)\n"
            "kafka.security.protocol = SASL_PLAINTEXT\n"
            "kafka.sasl.mechanisms = PLAIN\n"
            "kafka.sasl.username = admin\n"
            'kafka.sasl.password = "s3cret;x"\n'
            "redis-user = admin\n"
            "brokers = 10.0.0.1:9092\n")
        s = cf.load_settings(path, environ={})
        self.assertEqual(s.kafka, {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                   "sasl.username": "admin", "sasl.password": "s3cret;x"})
        self.assertEqual(s.brokers, "10.0.0.1:9092")
        self.assertEqual((s.request_topic, s.result_topic), ("codefleet.requests", "codefleet.results"))
        self.assertEqual((s.cancel_topic, s.output_topic), ("codefleet.requests.cancel", "codefleet.results.output"))
        # Printed (logs, tracebacks), the password is masked; the rest shows.
        self.assertNotIn("s3cret", repr(s))
        self.assertNotIn("s3cret", str(s))
        self.assertIn("'sasl.password': '***'", repr(s))
        self.assertIn("'sasl.username': 'admin'", repr(s))

    def test_sections_comments_separators(self):
        path = self.write(
            "; a comment\n\n"
            "request_topic: my.requests   ; inline comment\n"
            "result-topic = my.results\n"
            "[kafka]\n"
            "sasl.username = bob\n"
            "client.rack = r1;not-a-comment\n")
        values = cf.read_settings_file(path)
        self.assertEqual(values, {"request_topic": "my.requests", "result-topic": "my.results",
                                  "kafka.sasl.username": "bob", "kafka.client.rack": "r1;not-a-comment"})
        s = cf.load_settings(path, environ={})
        self.assertEqual((s.request_topic, s.result_topic), ("my.requests", "my.results"))
        self.assertEqual(s.kafka["sasl.username"], "bob")

    def test_precedence(self):
        path = self.write("brokers = from-file:1\nresult-topic = file.results\n")
        env = {"CODEFLEET_CONFIG": path, "CODEFLEET_BROKERS": "from-env:2"}
        s = cf.load_settings(environ=env)
        self.assertEqual((s.brokers, s.result_topic), ("from-env:2", "file.results"))
        self.assertEqual(cf.load_settings(environ={}).brokers, DEFAULT_BROKERS)

    def test_errors_name_the_line(self):
        with self.assertRaises(cf.ConfigError) as ctx:
            cf.read_settings_file(self.write("brokers = x\nno separator here\n"))
        self.assertIn("line 2", str(ctx.exception))
        with self.assertRaises(cf.ConfigError):
            cf.read_settings_file(self.write("[kafka\n"))
        with self.assertRaises(cf.ConfigError):
            cf.read_settings_file("/nonexistent/codefleet.conf")
        with self.assertRaises(cf.ConfigError):
            cf.read_settings_file(tempfile.gettempdir())  # a directory


if __name__ == "__main__":
    unittest.main()
