from google.adk.agents import LlmAgent

from kagent_governed_memory import AgentIdentity
from kagent_governed_memory.adk.dev import dev_app
from kagent_governed_memory.testing import ScriptedModel

root_agent = LlmAgent(
    name="my_agent",  # the folder's name
    model=ScriptedModel(),  # offline and scripted; put your model here, e.g. "gemini-2.5-flash"
    instruction="You are a helpful assistant.",
)
app = dev_app(root_agent, agent=AgentIdentity(namespace="dev", name="my-agent"))
