"""Hand-written material for the natural-feedback dev gold set (see `make_dev_gold.py`).

Forty everyday advice topics. Each has the user's opening question, the assistant's first answer,
terms taken verbatim from that answer (for clarification questions), two rephrasings of the
opening question (one close to its wording, one far from it), a correction that breaks an
assumption of the answer, a correction of the user's own opening message (a hard negative),
follow-up requests that are new (some phrased like clarifications but about things the answer
never mentioned: hard negatives too), and a second answer with a term of its own.

Topics 0-19 build the `dev` split, topics 20-39 the `test` split.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    key: str
    ask: str
    answer: str
    terms: tuple[str, ...]
    rephrases: tuple[str, str]
    correction: str
    self_fix: str
    followups: tuple[str, str, str]
    more: str
    more_term: str


TOPICS: tuple[Topic, ...] = (
    Topic(
        "sleep",
        "How can I fall asleep faster? I lie awake for about an hour most nights.",
        "Keep a consistent schedule: go to bed and get up at the same time every day, weekends included. "
        "Build a 30-minute wind-down routine without screens, and keep the bedroom cool and dark. If you "
        "are still awake after 20 minutes, get up and read something dull until you feel drowsy.",
        ("wind-down routine", "consistent schedule"),
        ("What can I do to fall asleep more quickly?",
         "Any tricks so I'm not staring at the ceiling for ages before I drift off?"),
        "I work rotating night shifts, so a fixed bedtime is impossible for me.",
        "Oops, small correction: it's more like two hours, not one.",
        ("Is it okay to take melatonin every night?",
         "Can you explain how caffeine affects sleep?",
         "Does working out in the evening keep you awake?"),
        "Melatonin is fine short term at a low dose, around 0.5 to 1 mg, taken an hour before bed. "
        "For the long run, light exposure matters more: get daylight in the morning and dim the lights at night.",
        "light exposure",
    ),
    Topic(
        "procrastination",
        "I keep putting off my thesis. How do I stop procrastinating?",
        "Break the thesis into tasks small enough to finish in one sitting, like 'outline section 2'. "
        "Use the Pomodoro technique: 25 minutes of focused work, then a 5-minute break. Put your phone in "
        "another room and start with the easiest task to build momentum.",
        ("Pomodoro technique", "build momentum"),
        ("How can I stop procrastinating on my thesis?",
         "I waste whole days avoiding my dissertation, what actually helps with that?"),
        "I have a full-time job, so I only have evenings and I'm exhausted by then.",
        "Sorry, I should have said dissertation, it's a PhD, not a master's thesis.",
        ("How many hours a day should a PhD student write?",
         "What is impostor syndrome, and is it common in grad school?",
         "Should I tell my advisor I'm behind schedule?"),
        "Most writers manage two to four hours of real writing a day. Protect those hours with a fixed "
        "start time and a shutdown ritual at the end of the day.",
        "shutdown ritual",
    ),
    Topic(
        "budgeting",
        "I never seem to have money left at the end of the month. How do I start budgeting?",
        "Start with the 50/30/20 rule: half of your take-home pay for needs, 30% for wants and 20% for "
        "savings. Track every expense for a month first so you know where the money goes, and set up an "
        "automatic transfer to savings on payday.",
        ("50/30/20 rule", "automatic transfer"),
        ("How do I begin making a budget?",
         "My paycheck is always gone before the month is over, where do I even start?"),
        "My rent alone is 60% of my income, so half for needs doesn't work.",
        "Actually, scratch that, I get paid every two weeks, not monthly.",
        ("Which budgeting app do you recommend?",
         "What does an emergency fund mean exactly, and how big should it be?",
         "Should I pay off my student loan first or save?"),
        "Apps like YNAB or a plain spreadsheet both work; the habit matters more than the tool. Use "
        "zero-based budgeting: give every dollar a job before the month starts.",
        "zero-based budgeting",
    ),
    Topic(
        "roommate",
        "My roommate never does the dishes and it's driving me crazy. What should I do?",
        "Talk to them at a calm moment, not when the sink is full. Use 'I' statements, like 'I feel "
        "stressed when the kitchen is messy', and propose a concrete chore chart you both agree on. "
        "Revisit it after two weeks.",
        ("'I' statements", "chore chart"),
        ("How do I get my roommate to do the dishes?",
         "The person I live with leaves a pile in the sink every day. How do I deal with that?"),
        "We already have a chore chart and she just ignores it.",
        "Sorry, I wrote roommate but it's actually my partner I live with.",
        ("How do I split groceries fairly with a roommate?",
         "What's a sublease and can I do one if I want to move out?",
         "Is it normal to share a bathroom schedule?"),
        "Split shared staples evenly and buy personal food separately; a shared notes app keeps the list "
        "honest. Agree on a monthly settle-up day.",
        "settle-up day",
    ),
    Topic(
        "raise",
        "How do I ask my boss for a raise? I've been at the company three years.",
        "Book a dedicated meeting rather than raising it in passing. Bring a list of concrete "
        "achievements and market data for your role from salary surveys. Name a specific number, a bit "
        "above what you want, and then stop talking and let them respond.",
        ("market data", "specific number"),
        ("What's the best way to ask my manager for a raise?",
         "After three years I feel underpaid. How do I bring up money with my boss?"),
        "My company has a pay freeze this year, so they'll just say there's no budget.",
        "Sorry, it's been four years, not three.",
        ("Should I mention an offer from another company?",
         "What is a counteroffer and should I accept one?",
         "How do I negotiate vacation days instead of salary?"),
        "Only mention an outside offer if you are truly willing to take it. If you do, keep it factual "
        "and focus on your total compensation, not just the salary.",
        "total compensation",
    ),
    Topic(
        "interview",
        "I get so nervous in job interviews that my mind goes blank. Any advice?",
        "Prepare three or four stories from your experience using the STAR method: situation, task, "
        "action, result. Do a mock interview with a friend out loud. On the day, slow your breathing "
        "with a few box breaths before you go in.",
        ("STAR method", "box breaths"),
        ("How do I stop my mind from going blank in interviews?",
         "My nerves wreck every interview I do. How do I keep my head clear?"),
        "The interviews are all on video calls, so there's no 'going in'.",
        "Correction: it's mostly phone screens, not in-person interviews.",
        ("What should I wear to an interview at a startup?",
         "What's a behavioral question, can you give an example?",
         "How soon should I send a follow-up email?"),
        "At a startup, smart casual is usually right: a clean shirt, no suit. Check their careers page "
        "or social media photos to match the company culture.",
        "company culture",
    ),
    Topic(
        "flaky-friend",
        "My best friend cancels plans at the last minute all the time. How do I handle it?",
        "Tell her honestly how it affects you, without accusing. Suggest plans that are easy to keep, "
        "like a short coffee near her place. If it keeps happening, lower your investment and put more "
        "energy into friends who show up.",
        ("lower your investment", "easy to keep"),
        ("What do I do about a friend who keeps cancelling at the last minute?",
         "She bails on me constantly, sometimes an hour before. How should I react?"),
        "She has a chronic illness, so the cancellations aren't really her fault.",
        "Sorry, he, not she, my best friend is a guy.",
        ("How do I make new friends as an adult?",
         "Can you explain what a fair-weather friend is?",
         "Is it okay to go to the concert without her?"),
        "Join something that meets weekly, like a climbing gym or a choir: repeated contact is what turns "
        "acquaintances into friends. Say yes to invitations for a few months.",
        "repeated contact",
    ),
    Topic(
        "spanish",
        "What's the fastest way to learn Spanish? I'm moving to Madrid in six months.",
        "Do 30 minutes a day of spaced repetition for vocabulary, and from week one book two lessons a "
        "week with a tutor online. Add comprehensible input: podcasts and shows slightly above your "
        "level, with Spanish subtitles.",
        ("spaced repetition", "comprehensible input"),
        ("How can I learn Spanish as fast as possible?",
         "I relocate to Madrid in half a year and speak no Spanish. What's the quickest route?"),
        "I can't afford a tutor, I'm already stretched thin with the move.",
        "Wait, I meant Barcelona, not Madrid.",
        ("Should I learn Catalan too?",
         "What is the subjunctive and why is it so hard?",
         "Are there good Spanish podcasts for beginners?"),
        "Start with 'Coffee Break Spanish' or 'Notes in Spanish', then move to native content. Shadowing, "
        "repeating a sentence right after the speaker, helps your accent.",
        "Shadowing",
    ),
    Topic(
        "running",
        "I want to start running but I get out of breath after two minutes. How do I begin?",
        "Use a run-walk plan: run one minute, walk two, repeated eight times, three days a week. Go slow "
        "enough that you could hold a conversation. Add a little running time each week, no more than "
        "10% more.",
        ("run-walk plan", "hold a conversation"),
        ("How do I start running when I'm completely out of shape?",
         "Two minutes of jogging and I'm gasping. How do beginners build up?"),
        "I have bad knees, my doctor said no high-impact exercise for now.",
        "Oops, I meant I get out of breath after one minute, it's even worse.",
        ("What shoes should I buy for running?",
         "Can you explain what a VO2 max is?",
         "Is it better to run in the morning or evening?"),
        "Go to a running shop and get a gait analysis; they'll watch you run and suggest neutral or "
        "stability shoes. Replace them every 500 to 800 km.",
        "gait analysis",
    ),
    Topic(
        "meal-prep",
        "How can I eat healthy on a tight budget? I usually end up ordering takeout.",
        "Batch cook on Sunday: one big pot of lentil chili or curry gives you four or five lunches. Buy "
        "staples like rice, oats, beans and frozen vegetables in bulk. Plan the week's meals before you "
        "shop so nothing goes to waste.",
        ("Batch cook", "staples"),
        ("What's the cheapest way to eat healthy?",
         "I keep blowing money on delivery food. How do I eat well without spending much?"),
        "I'm allergic to legumes, so lentils and beans are out.",
        "Sorry, I should mention I'm cooking for two, not just me.",
        ("What's a quick breakfast I can make the night before?",
         "What does 'whole foods' mean in nutrition?",
         "Is frozen fish as good as fresh?"),
        "Overnight oats take two minutes: oats, milk or yogurt, and fruit in a jar in the fridge. Add a "
        "spoon of nut butter for protein.",
        "Overnight oats",
    ),
    Topic(
        "new-city",
        "I just moved to a new city for work and I don't know anyone. How do I meet people?",
        "Pick one or two recurring activities, like a run club or a language exchange, and go every week. "
        "Use Meetup or local Facebook groups, and accept every invitation from coworkers for the first "
        "couple of months.",
        ("language exchange", "recurring activities"),
        ("How do I meet people in a city where I know nobody?",
         "I relocated for a job and I'm lonely. Where do adults actually make friends?"),
        "I work fully remote, so there are no coworkers to hang out with.",
        "Actually, I moved three months ago, not just now.",
        ("What should I do on weekends alone?",
         "Can you explain how coworking spaces work?",
         "Is it weird to go to a bar by myself?"),
        "Weekends alone can be good: explore one new neighborhood each week, try a class, or volunteer. "
        "Volunteering gives you a shared purpose, which makes conversation easy.",
        "shared purpose",
    ),
    Topic(
        "tantrums",
        "My three-year-old has huge tantrums every time we leave the playground. What can I do?",
        "Give a five-minute warning and then a one-minute warning, so the transition isn't a surprise. "
        "Offer a choice, like 'do you want to hop or run to the car?'. During the tantrum, stay calm and "
        "name the feeling: 'you're sad we're leaving'.",
        ("five-minute warning", "name the feeling"),
        ("How do I stop my toddler melting down when we leave the park?",
         "Leaving the playground turns into screaming every single time. How do other parents cope?"),
        "He's autistic, and warnings don't seem to register with him.",
        "Sorry, she's four, not three.",
        ("How much screen time is okay for a toddler?",
         "What's a sensory bin and are they worth it?",
         "Should I still give her a nap at three?"),
        "The WHO suggests no more than an hour a day of screen time at that age, ideally watched together. "
        "Co-viewing turns it into a conversation instead of a babysitter.",
        "Co-viewing",
    ),
    Topic(
        "teen-screens",
        "My 14-year-old is on his phone until 2am. How do I set limits without a war?",
        "Agree on the rules together instead of imposing them: for example, phones charge in the kitchen "
        "from 10pm. Explain the reason, sleep, not punishment. Follow the same rule yourself, and use the "
        "built-in parental controls as a backup, not the main tool.",
        ("parental controls", "charge in the kitchen"),
        ("How can I limit my teenager's phone use at night?",
         "My son scrolls until the small hours. How do I rein that in without constant fights?"),
        "He uses the phone for homework too, so taking it away at 10 isn't realistic.",
        "Oops, he's 16, I typed 14 by mistake.",
        ("Should I read his messages?",
         "Can you explain what doomscrolling is?",
         "Is it normal for teens to sleep until noon?"),
        "Reading his messages usually destroys trust unless there's a real safety concern. Aim for open "
        "communication: ask about his online life the way you'd ask about school.",
        "open communication",
    ),
    Topic(
        "say-no",
        "My manager keeps piling extra projects on me. How do I say no without hurting my career?",
        "Don't say a flat no; ask about priorities instead: 'I can take this on, which of my current "
        "projects should I pause?'. Keep a written list of your workload so the trade-off is visible. "
        "Offer an alternative, like a later start date.",
        ("ask about priorities", "trade-off"),
        ("How do I turn down extra work from my boss?",
         "I'm drowning in assignments and my manager keeps adding more. How can I push back safely?"),
        "My manager already knows my workload and says everything is top priority.",
        "Sorry, it's my team lead, not my manager, if that matters.",
        ("How do I ask for a promotion?",
         "What does 'managing up' mean?",
         "Should I talk to HR about my workload?"),
        "Go to HR only after you've raised it with your manager in writing. Document dates, hours and the "
        "impact on your work, so the discussion is about facts.",
        "in writing",
    ),
    Topic(
        "moving-out",
        "I'm 24 and want to move out, but my parents take it personally. How do I tell them?",
        "Tell them in person, and frame it as a step in your life, not a rejection of them. Share the "
        "practical plan, where, when, how you'll pay, so they can see you've thought it through. Invite "
        "them to help with something, like choosing furniture.",
        ("practical plan", "rejection"),
        ("How do I tell my parents I'm moving out?",
         "Mom and dad get hurt whenever I mention getting my own place. How do I break the news?"),
        "In my culture, children usually live with their parents until marriage.",
        "Sorry, I'm 26, not 24.",
        ("How much should I save before moving out?",
         "What's renter's insurance and do I need it?",
         "How do I find a good roommate?"),
        "Save at least three months of rent plus the deposit and moving costs. Build a first-month "
        "budget that includes furniture and utility hook-up fees.",
        "utility hook-up fees",
    ),
    Topic(
        "wedding",
        "I've been invited to a wedding I can't afford to attend. How do I decline politely?",
        "RSVP no as early as possible, and keep the message warm and short: you're sorry to miss it and "
        "wish them the best. You don't owe a detailed reason. Send a small gift or a heartfelt card.",
        ("RSVP", "heartfelt card"),
        ("What's a polite way to say no to a wedding invitation?",
         "I can't pay for the trip to my cousin's wedding. How do I turn it down nicely?"),
        "I'm supposed to be a bridesmaid, so it's not a simple RSVP.",
        "Sorry, it's my cousin's wedding, not a friend's, so family will notice.",
        ("How much should I spend on a wedding gift?",
         "What's a destination wedding etiquette for guests?",
         "Can I bring a date if the invite doesn't say plus one?"),
        "A common guideline is to spend what you'd spend on a nice dinner with the couple. A gift from "
        "the registry is always safe.",
        "registry",
    ),
    Topic(
        "long-distance",
        "My girlfriend is moving abroad for two years. How do we make long distance work?",
        "Set a rhythm of calls you both can keep, like a longer video call twice a week plus short "
        "messages. Have an end date or a plan for closing the distance. Plan visits in advance so there's "
        "always something to look forward to.",
        ("closing the distance", "rhythm of calls"),
        ("How do couples make a long-distance relationship last?",
         "She's leaving for another country for two years. How do we stay together?"),
        "There's a nine-hour time difference, so we're almost never awake at the same time.",
        "Correction: it's eighteen months, not two years.",
        ("What are good gift ideas to send overseas?",
         "What is a love language, is it real?",
         "Is it normal to feel jealous of her new friends?"),
        "Send letters, a playlist, or a care package with snacks from home. Small sensory things like a "
        "shirt that smells like you matter more than price.",
        "care package",
    ),
    Topic(
        "public-speaking",
        "I have to give a presentation to 200 people next week and I'm terrified. Help?",
        "Rehearse out loud at least five times, once in front of a friend. Know your first two minutes "
        "by heart, because nerves peak at the start. Use slides with few words as cues, and pause "
        "instead of saying 'um'.",
        ("first two minutes", "as cues"),
        ("How do I get over my fear of presenting in front of a big audience?",
         "Next week I'm on stage in front of a crowd and I'm panicking. What do I do?"),
        "I'm not allowed to use slides, it's a speech at a conference dinner.",
        "Oops, it's 300 people, they just told me.",
        ("How do I handle tough questions afterwards?",
         "What's the rule of three in speeches?",
         "Should I open with a joke?"),
        "Repeat the question before answering, which buys you time. If you don't know, say so and offer "
        "to follow up; bluffing is what audiences remember.",
        "follow up",
    ),
    Topic(
        "declutter",
        "My apartment is full of stuff and I feel overwhelmed. How do I declutter?",
        "Start with one drawer, not the whole apartment. Use the four-box method: keep, donate, sell, "
        "trash. Decide quickly: if you haven't used it in a year, it goes. Take the donate box out of the "
        "house the same day.",
        ("four-box method", "donate box"),
        ("How should I start decluttering my flat?",
         "There's junk everywhere and I freeze every time I try to tidy. Where do I begin?"),
        "Most of the stuff is my late mother's, so it's emotional, not just clutter.",
        "Sorry, it's a house, not an apartment, so it's even more stuff.",
        ("How do I keep it tidy afterwards?",
         "What's the KonMari method?",
         "Where can I sell old furniture?"),
        "Use a one-in, one-out rule: every new item replaces an old one. A ten-minute reset every evening "
        "keeps things from piling up again.",
        "one-in, one-out rule",
    ),
    Topic(
        "noisy-neighbors",
        "My upstairs neighbors stomp around until midnight. How do I deal with it?",
        "Start with a friendly face-to-face chat; they may not realise how much noise travels. Suggest a "
        "concrete fix, like rugs or quiet hours after 10pm. If that fails, keep a noise log and contact "
        "your landlord.",
        ("noise log", "quiet hours"),
        ("What can I do about loud upstairs neighbours?",
         "The people above me are thumping around every night. How do I get some peace?"),
        "I own my place, there's no landlord, it's a condo with an HOA.",
        "Oops, it's until 2am, not midnight.",
        ("Do earplugs damage your ears?",
         "Can you explain what a noise ordinance is?",
         "Would a white noise machine help?"),
        "A white noise machine masks thumps fairly well if you place it between the bed and the noise. "
        "Foam earplugs are safe for nightly use if you keep them clean.",
        "white noise machine",
    ),
    # ------------------------------------------------------------------ test topics
    Topic(
        "deposit",
        "My landlord won't return my security deposit. What are my options?",
        "Send a written demand letter that cites your lease and your state's deposit law, with a deadline "
        "of 14 days. Include your move-out photos. If they don't pay, file in small claims court; it's "
        "cheap and you don't need a lawyer.",
        ("demand letter", "small claims court"),
        ("How do I get my deposit back from my landlord?",
         "I moved out two months ago and my old landlord is just keeping my money. What can I do?"),
        "I didn't take any move-out photos, so I have no proof.",
        "Sorry, it's a property management company, not a private landlord.",
        ("Can a landlord charge for normal wear and tear?",
         "What's a lease break fee?",
         "How do I find a tenant lawyer?"),
        "No, normal wear and tear, like faded paint or small nail holes, can't be deducted. Damage "
        "beyond that, like a broken door, can.",
        "wear and tear",
    ),
    Topic(
        "credit-card",
        "I have $8,000 of credit card debt across three cards. How do I pay it off?",
        "List the cards by interest rate and use the avalanche method: minimum payments on all, every "
        "extra dollar to the highest rate. Call the card companies and ask for a lower rate. Consider a "
        "balance transfer card with 0% for 18 months.",
        ("avalanche method", "balance transfer"),
        ("What's the best way to get rid of my credit card debt?",
         "Three maxed cards, eight grand owed. How do I dig myself out?"),
        "My credit score is too low to qualify for a balance transfer card.",
        "Correction: it's $12,000, I forgot the store card.",
        ("Should I close the cards after paying them off?",
         "What's a debt consolidation loan?",
         "How does a credit score work?"),
        "Keep the oldest card open, since closing it shortens your credit history and raises your "
        "utilization ratio.",
        "utilization ratio",
    ),
    Topic(
        "burnout",
        "I feel completely burned out at work. I dread Mondays. What should I do?",
        "Take stock of what drains you most: workload, lack of control, or conflict. Protect recovery "
        "time: real evenings off with no email. Talk to your manager about one concrete change, and "
        "consider using your vacation days now instead of saving them.",
        ("recovery time", "one concrete change"),
        ("How do I recover from burnout at my job?",
         "Every Sunday night I feel sick thinking about the week. How do I get out of this?"),
        "I'm self-employed, so there's no manager and no paid vacation.",
        "Sorry, I meant I dread every day, not just Mondays.",
        ("Should I see a therapist for this?",
         "What is quiet quitting?",
         "How do I explain a career break on my CV?"),
        "A therapist can help you separate job problems from deeper patterns. Many employers offer an "
        "employee assistance program with a few free sessions.",
        "employee assistance program",
    ),
    Topic(
        "career-change",
        "I'm 35 and want to switch from accounting to software development. Is it realistic?",
        "Yes, many people switch in their thirties. Start with a free course like CS50 to check you enjoy "
        "it, then build two or three portfolio projects that solve real problems. Your accounting "
        "background is an asset for fintech roles.",
        ("portfolio projects", "fintech roles"),
        ("Can I realistically become a programmer at 35 coming from accounting?",
         "Is it too late for a mid-thirties accountant to get into tech?"),
        "I have two kids and can only study about five hours a week.",
        "Oops, I'm 38, not 35.",
        ("Is a bootcamp worth the money?",
         "What's the difference between frontend and backend?",
         "Which language should I learn first?"),
        "Bootcamps can speed things up, but check their job placement rates from independent reviews. "
        "An income share agreement can be risky, read it carefully.",
        "income share agreement",
    ),
    Topic(
        "dog-barking",
        "My dog barks nonstop when I leave for work. The neighbors are complaining. What can I do?",
        "Practice short departures: leave for one minute, come back calmly, and slowly build up the time. "
        "Give him a frozen Kong filled with food when you go. A long walk before you leave helps him "
        "settle.",
        ("short departures", "frozen Kong"),
        ("How do I stop my dog barking when I'm out?",
         "Whenever I head to the office my pup howls for hours. How do I fix that?"),
        "I leave at 6am, so a long walk before work isn't going to happen.",
        "Sorry, it's my girlfriend's dog, she's just staying with me for now.",
        ("Is doggy daycare worth it?",
         "What is separation anxiety in dogs?",
         "Should I get a second dog to keep him company?"),
        "Daycare works well for social, energetic dogs two or three days a week. Ask for a trial day "
        "and watch how he behaves when you pick him up.",
        "trial day",
    ),
    Topic(
        "plants",
        "All my houseplants keep dying. What am I doing wrong?",
        "The most common killer is overwatering: water only when the top two centimeters of soil are dry. "
        "Use pots with drainage holes, and check the light: most plants need bright indirect light near a "
        "window.",
        ("bright indirect light", "drainage holes"),
        ("Why do my indoor plants keep dying?",
         "Everything green I bring home is dead within a month. What's going on?"),
        "My apartment faces north and gets almost no sun.",
        "Correction, it's mostly succulents, not regular houseplants.",
        ("Which plants are safe for cats?",
         "What is repotting and when should I do it?",
         "Do I need to fertilize in winter?"),
        "Spider plants, calatheas and Boston ferns are non-toxic to cats. Check the ASPCA list before "
        "buying anything new.",
        "ASPCA list",
    ),
    Topic(
        "split-bills",
        "My partner earns twice what I do. How should we split the bills?",
        "Many couples split shared costs in proportion to income: if they earn two thirds of the total, "
        "they pay two thirds of rent and groceries. Keep a joint account for shared costs and separate "
        "accounts for personal spending.",
        ("in proportion to income", "joint account"),
        ("What's a fair way to divide expenses when one partner earns more?",
         "They make double my salary. Is fifty-fifty on rent fair or not?"),
        "We're not married and my partner refuses to have a joint account.",
        "Sorry, they earn about three times what I do, not twice.",
        ("Should we sign a cohabitation agreement?",
         "What does 'financial infidelity' mean?",
         "Who should pay for vacations?"),
        "A cohabitation agreement is worth it if you own property or have very different incomes. It "
        "spells out who owns what if you split.",
        "cohabitation agreement",
    ),
    Topic(
        "gift-in-law",
        "What's a good birthday gift for my father-in-law? He says he doesn't want anything.",
        "Go for an experience rather than an object: tickets to a game or a nice dinner with the family. "
        "Consumables also work, like a good bottle of whisky or coffee from a local roaster. A framed "
        "photo of the grandkids rarely fails.",
        ("experience rather than an object", "Consumables"),
        ("What should I get my father-in-law for his birthday?",
         "The man insists he wants nothing for his 60th. What on earth do I buy him?"),
        "He doesn't drink and there are no grandkids yet.",
        "Sorry, it's for his 70th, it's a big one.",
        ("How much should I spend on an in-law gift?",
         "What's a subscription box?",
         "Should my husband pick the gift instead?"),
        "Something in the 50 to 100 dollar range is typical for a milestone birthday. A group gift from "
        "the siblings can cover something bigger.",
        "group gift",
    ),
    Topic(
        "quit-smoking",
        "I've smoked for ten years and want to quit. What actually works?",
        "Combine nicotine replacement, like patches plus gum for cravings, with support: a quitline or an "
        "app roughly doubles success rates. Pick a quit date within two weeks and remove every cigarette "
        "and lighter from your home.",
        ("nicotine replacement", "quit date"),
        ("What's the most effective way to quit smoking?",
         "A decade of a pack a day. How do I finally kick it?"),
        "I'm pregnant, so I'm not sure nicotine patches are safe.",
        "Sorry, it's vaping, not cigarettes, if that changes anything.",
        ("How long do cravings last?",
         "What is varenicline?",
         "Will I gain weight after quitting?"),
        "Single cravings fade within five to ten minutes. The urge surfing technique helps: notice the "
        "craving, breathe, and watch it peak and pass.",
        "urge surfing",
    ),
    Topic(
        "exams",
        "I have four exams in two weeks and I haven't started studying. How do I plan?",
        "Make a calendar that gives each exam time in proportion to how hard it is and how soon it comes. "
        "Use active recall: test yourself with past papers instead of rereading notes. Study in 50-minute "
        "blocks and sleep at least seven hours.",
        ("active recall", "past papers"),
        ("How do I plan my studying for four exams in two weeks?",
         "Finals are in a fortnight and I haven't opened a book. How do I organize this?"),
        "There are no past papers for my courses, the professors don't release them.",
        "Oops, it's five exams, I forgot statistics.",
        ("Is it better to pull an all-nighter or sleep?",
         "What's the Feynman technique?",
         "Does coffee help with studying?"),
        "Sleep wins: memory consolidation happens during sleep, so an all-nighter erases much of what "
        "you studied.",
        "memory consolidation",
    ),
    Topic(
        "credit-thief",
        "A coworker keeps presenting my ideas as his own in meetings. How do I handle this?",
        "Put your ideas in writing before meetings, for example a short email to the team, so there's a "
        "record. In the meeting, claim it calmly: 'thanks for bringing up my proposal, let me add the "
        "details'. If it continues, talk to him privately.",
        ("in writing before meetings", "claim it calmly"),
        ("What do I do about a colleague who steals credit for my work?",
         "This guy on my team passes off my suggestions as his. How do I stop him?"),
        "He's my boss's favorite, so talking to him privately will backfire.",
        "Sorry, it's a she, my coworker is a woman.",
        ("Should I go to HR about it?",
         "What is a skip-level meeting?",
         "How do I get more visibility at work?"),
        "Try a skip-level conversation first: talk to your manager's manager about your projects, not "
        "about the coworker. HR is for when it becomes a pattern you can document.",
        "skip-level conversation",
    ),
    Topic(
        "apology",
        "I said something hurtful to my friend during an argument. How do I apologize?",
        "Apologize soon and in person if you can. Name exactly what you said and why it was hurtful, "
        "without adding 'but'. Don't ask for instant forgiveness; ask what you can do to make it right.",
        ("without adding 'but'", "make it right"),
        ("What's the right way to apologize to a friend I hurt?",
         "I snapped at my friend and said something cruel. How do I fix this?"),
        "She's blocked me everywhere, so I can't talk to her in person.",
        "Sorry, it was a text message, not during an argument in person.",
        ("How long should I wait for her to reply?",
         "What's the difference between guilt and shame?",
         "Should I send flowers?"),
        "Give her space: a week or two is normal. One gentle check-in after that is fine, then leave the "
        "door open.",
        "gentle check-in",
    ),
    Topic(
        "elderly-parent",
        "My 82-year-old dad refuses any help at home even though he fell twice. What can I do?",
        "Focus on his goals, staying independent at home, and present help as what makes that possible. "
        "Start small, like a cleaner once a week, and let him choose. A medical alert pendant is a good "
        "first step after falls.",
        ("medical alert pendant", "Start small"),
        ("How do I get my elderly father to accept help at home?",
         "Dad's in his eighties, keeps falling, and won't let anyone in. What do I do?"),
        "He lives in another country, so I can't visit often.",
        "Sorry, he's 87, I keep forgetting.",
        ("Are there grants for home modifications?",
         "What is power of attorney?",
         "How do I choose a care home?"),
        "Many regions fund grab bars and stair lifts. Ask his doctor for an occupational therapy "
        "assessment; the therapist can recommend what to change.",
        "occupational therapy assessment",
    ),
    Topic(
        "car-price",
        "I'm buying a used car next week. How do I negotiate the price?",
        "Check the market value on sites like Kelley Blue Book before you go. Get a pre-purchase "
        "inspection from an independent mechanic and use any problems to lower the price. Be ready to "
        "walk away; that's your strongest move.",
        ("pre-purchase inspection", "walk away"),
        ("How do I haggle on a second-hand car?",
         "Going to see a used car on Saturday. How do I not get ripped off on price?"),
        "It's a private sale from my neighbor, so walking away would be awkward.",
        "Oops, it's a motorcycle, not a car.",
        ("Should I pay cash or finance?",
         "What's a vehicle history report?",
         "Is an extended warranty worth it?"),
        "Cash avoids interest, but dealer financing can be cheap during promotions. Compare the APR "
        "with a loan from your credit union.",
        "credit union",
    ),
    Topic(
        "two-jobs",
        "I work two jobs and have no time for anything. How do I manage my time better?",
        "Do a one-week time audit: write down what you do every hour. Batch errands into one trip a week, "
        "and block one protected hour for yourself every day. Say no to anything that doesn't pay or "
        "restore you.",
        ("time audit", "protected hour"),
        ("How do I manage my time when I have two jobs?",
         "Between two jobs I have zero hours left. How do people fit life in?"),
        "My shifts change every week, so I can't block a fixed hour.",
        "Sorry, it's three jobs if you count weekend delivery.",
        ("Can I ask for a schedule change at one job?",
         "What's a side hustle that pays well?",
         "How do I meal prep with no time?"),
        "Ask for a predictable schedule in writing and explain the second job; many managers prefer a "
        "reliable worker to a flexible one.",
        "predictable schedule",
    ),
    Topic(
        "shy-child",
        "My shy six-year-old is starting at a new school. How can I help her settle in?",
        "Visit the school together before the first day, and meet the teacher if possible. Arrange a "
        "playdate with one classmate early on. Keep goodbyes short and cheerful, and ask specific "
        "questions after school.",
        ("playdate", "specific questions"),
        ("How do I help my shy daughter adjust to a new school?",
         "She's six, very quiet, and changing schools. How do I make the move easier for her?"),
        "We're moving in the middle of the school year, so no visit is possible beforehand.",
        "Sorry, she's seven, not six.",
        ("Should she do after-school clubs?",
         "What is selective mutism?",
         "How do I talk to the teacher about her shyness?"),
        "One club built around something she already loves is plenty. Small groups are easier than big "
        "teams for shy kids.",
        "Small groups",
    ),
    Topic(
        "breakup",
        "My boyfriend of five years broke up with me. How do I get through this?",
        "Let yourself grieve; it's a real loss. Go no contact for at least a month so you can heal. Lean "
        "on friends, keep a basic routine of sleep, food and movement, and write down what you want in "
        "your next chapter.",
        ("no contact", "basic routine"),
        ("How do I cope after a long relationship ends?",
         "Five years together and he just left. How am I supposed to survive this?"),
        "We work at the same company, so no contact isn't an option.",
        "Sorry, it was six years, and I ended it, not him.",
        ("When is it okay to start dating again?",
         "What's a rebound relationship?",
         "Should I delete our photos?"),
        "There's no fixed timeline. A good sign is when you're curious about someone new rather than "
        "looking to fill the gap he left.",
        "fill the gap",
    ),
    Topic(
        "budget-trip",
        "How can I travel Europe for a month on a small budget?",
        "Travel in shoulder season, April to May or September to October, when prices drop. Use "
        "overnight buses and trains to save on accommodation, stay in hostels with kitchens, and pick "
        "cheaper countries like Portugal, Poland and Hungary.",
        ("shoulder season", "overnight buses"),
        ("What's the cheapest way to backpack Europe for a month?",
         "Thirty days in Europe with very little cash. How do I pull that off?"),
        "I can only travel in July because of my job.",
        "Oops, I meant two months, not one.",
        ("Is a Eurail pass worth it?",
         "What's the Schengen 90-day rule?",
         "Do I need travel insurance?"),
        "A rail pass pays off only if you take long trips often. For a few routes, point-to-point tickets "
        "booked early are cheaper.",
        "point-to-point tickets",
    ),
    Topic(
        "micromanager",
        "My new boss micromanages everything I do. How do I cope?",
        "Get ahead of her: send a short status update every morning so she doesn't need to check on you. "
        "Ask directly what she needs to feel confident about your work. Over time, propose moving to a "
        "weekly check-in.",
        ("status update", "weekly check-in"),
        ("How do I deal with a micromanaging manager?",
         "She checks every email I send before it goes out. How do I survive this?"),
        "I already send daily updates and she still hovers.",
        "Sorry, my boss is a he, not a she.",
        ("Is it time to look for another job?",
         "What does 'psychological safety' mean?",
         "How do I talk to my boss's boss?"),
        "If nothing changes after a few honest conversations, start a quiet job search. Exit interviews "
        "rarely change anything, so don't count on them.",
        "quiet job search",
    ),
    Topic(
        "resignation",
        "How do I write a resignation letter? I'm leaving on good terms.",
        "Keep it short: state that you're resigning, your last working day based on your notice period, "
        "and a sentence of thanks. Offer to help with the handover. Tell your manager in person before "
        "you send it.",
        ("notice period", "handover"),
        ("What should a resignation letter say?",
         "I'm quitting and want to leave gracefully. What do I put in writing?"),
        "My contract has no notice period, I'm a freelancer on a retainer.",
        "Sorry, I'm leaving for a competitor, if that changes things.",
        ("Should I tell coworkers before my boss?",
         "What is garden leave?",
         "Can I ask for a reference?"),
        "Tell your boss first, always. Ask for a reference in your exit conversation, while the goodwill "
        "is fresh.",
        "exit conversation",
    ),
)

DEV_TOPICS = TOPICS[:20]
TEST_TOPICS = TOPICS[20:]
