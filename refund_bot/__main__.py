from refund_bot.cli import main

main()
