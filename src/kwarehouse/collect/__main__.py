from kwarehouse.collect.command import standalone

standalone()
